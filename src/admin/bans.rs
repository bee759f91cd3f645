//! `/admin/bans`: list the bans in force, ban a key by hand, lift a ban.
//! Bans are kept by each rule's [`crate::store::bans::BanTable`]; a key is
//! written as text and hashed as the request path hashes it. Keys are shown
//! as the policy's [`crate::key::KeyLabels`] show them, and a ban is lifted
//! by its key in clear or as it is shown.

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use super::{json_response, problem};
use crate::key::KeyText;
use crate::proxy::Proxy;
use crate::store::{BucketKey, Store};

/// `GET /admin/bans`: every ban in force, all rules.
pub(super) fn list(proxy: &Proxy) -> Response<Full<Bytes>> {
    let now = proxy.now();
    let policy = proxy.policy();
    let bans: Vec<Value> = policy
        .rules
        .iter()
        .flat_map(|rule| {
            let labels = &policy.labels;
            rule.bans.active(now).into_iter().map(move |ban| {
                let key = ban.key_text.map(|text| labels.show(&rule.key, &text));
                json!({
                    "rule": &*rule.name,
                    "key": key,
                    "until": ban.until / 1_000_000_000,
                    "remaining_secs": (ban.until - now).div_ceil(1_000_000_000),
                    "manual": ban.manual,
                })
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "bans": bans }))
}

/// `POST /admin/bans` with `{"rule", "key", "for"}`.
pub(super) fn add(proxy: &Proxy, body: &Value) -> Response<Full<Bytes>> {
    let field = |name: &str| body.get(name).and_then(Value::as_str);
    let (Some(rule_name), Some(key), Some(duration)) = (field("rule"), field("key"), field("for"))
    else {
        return problem(
            StatusCode::BAD_REQUEST,
            "expected {\"rule\": NAME, \"key\": KEY, \"for\": DURATION}, for example \
             {\"rule\": \"per-seller\", \"key\": \"seller-42\", \"for\": \"10m\"}",
        );
    };
    let duration = match crate::config::parse_duration(duration) {
        Ok(duration) if !duration.is_zero() => duration,
        _ => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!(
                    "\"for\": \"{duration}\" is not a duration such as \"90s\", \"10m\" or \"1h\""
                ),
            )
        }
    };
    let policy = proxy.policy();
    let Some(rule) = policy.rule(rule_name) else {
        return problem(
            StatusCode::NOT_FOUND,
            &format!("no rule is named \"{rule_name}\""),
        );
    };
    let bucket = match policy.keys.key_of_text(&rule.key, key) {
        Ok(bucket) => bucket,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    let now = proxy.now();
    let nanos = duration.as_nanos().min(u128::from(u64::MAX)) as u64;
    let text = KeyText::typed(key, rule.key.len());
    let shown = policy.labels.show(&rule.key, &text);
    rule.bans.ban(bucket, text, now, nanos);
    // Shared where requests look for it: in Redis for a rule with `ban`.
    if let (Store::Redis(store), Some(limit), Some(_)) =
        (proxy.store(), rule.limits.first(), rule.ban.as_ref())
    {
        store.ban(&limit.table, bucket, nanos);
    }
    rule.counters.bans_started.inc();
    tracing::info!(rule = %rule.name, key = %shown, ?duration, "key banned by hand");
    json_response(
        StatusCode::CREATED,
        &json!({
            "rule": &*rule.name,
            "key": shown,
            "until": now.saturating_add(nanos) / 1_000_000_000,
            "remaining_secs": nanos.div_ceil(1_000_000_000),
            "manual": true,
        }),
    )
}

/// `DELETE /admin/bans?rule=R&key=K`, K in clear or as the listing shows it.
pub(super) fn lift(proxy: &Proxy, query: Option<&str>) -> Response<Full<Bytes>> {
    let param = |name| crate::key::query_value(query, name).map(crate::key::decode_query);
    let (Some(rule_name), Some(key)) = (param("rule"), param("key")) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "name the ban to lift: DELETE /admin/bans?rule=RULE&key=KEY (percent-encode '|' as %7C)",
        );
    };
    let policy = proxy.policy();
    let Some(rule) = policy.rule(&rule_name) else {
        return problem(
            StatusCode::NOT_FOUND,
            &format!("no rule is named \"{rule_name}\""),
        );
    };
    let now = proxy.now();
    // The bans listed under the key as given, in clear or as its label;
    // a ban whose key was never written (mirrored from another instance)
    // is found by hashing the key below.
    let labelled: Vec<(BucketKey, KeyText)> = rule
        .bans
        .active(now)
        .into_iter()
        .filter_map(|ban| Some((ban.key, ban.key_text?)))
        .filter(|(_, text)| policy.labels.names(&rule.key, text, &key))
        .collect();
    let (buckets, shown) = match labelled.first() {
        Some((_, text)) => {
            let shown = policy.labels.show(&rule.key, text);
            (labelled.iter().map(|(bucket, _)| *bucket).collect(), shown)
        }
        None => match policy.keys.key_of_text(&rule.key, &key) {
            Ok(bucket) => (vec![bucket], policy.labels.show_typed(&rule.key, &key)),
            Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
        },
    };
    let mut lifted = false;
    for bucket in buckets {
        if let (Store::Redis(store), Some(limit)) = (proxy.store(), rule.limits.first()) {
            store.lift(&limit.table, bucket);
        }
        lifted |= rule.bans.lift(bucket, now);
    }
    if lifted {
        tracing::info!(rule = %rule.name, key = %shown, "ban lifted by hand");
        json_response(
            StatusCode::OK,
            &json!({ "rule": rule_name, "key": shown, "lifted": true }),
        )
    } else {
        problem(
            StatusCode::NOT_FOUND,
            &format!("rule \"{rule_name}\" has no ban in force on \"{shown}\""),
        )
    }
}
