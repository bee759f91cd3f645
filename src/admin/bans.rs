//! `/admin/bans`: list the bans in force, ban a key by hand, lift a ban.
//! Bans are kept by each rule's [`crate::store::bans::BanTable`] and, with
//! a shared store, on the fleet's board in Redis
//! ([`crate::store::redis::BanBoard`]), so that a ban set or lifted through
//! one instance holds or ends on all. A key is written as text and hashed
//! as the request path hashes it. Keys are shown as the policy's
//! [`crate::key::KeyLabels`] show them, and a ban is lifted by its key in
//! clear or as it is shown.

use http::StatusCode;
use serde_json::{json, Value};

use std::collections::HashSet;

use super::{bad, json_response, no_rule, Answer, RefusedCall};
use crate::clock::Nanos;
use crate::key::KeyText;
use crate::proxy::Proxy;
use crate::store::redis::Posted;
use crate::store::{BucketKey, StoreError};

/// `GET /admin/bans`: every ban in force, all rules. With a shared store,
/// the fleet's (the board in Redis) and this instance's own that are not
/// on the board yet (or could not be posted); `"shared": false` when Redis
/// could not be read, and this instance's copy is listed.
pub(super) async fn list(proxy: &Proxy) -> Answer {
    let now = proxy.now();
    let policy = proxy.policy();
    let labels = &policy.labels;
    let mut bans = Vec::new();
    let mut on_board = HashSet::new();
    let board = match proxy.store().board() {
        Some(board) => Some(board.list().await),
        None => None,
    };
    if let Some(Ok(listed)) = &board {
        for ban in listed {
            let Some(rule) = policy.rule(&ban.rule) else {
                // A rule this config no longer has.
                continue;
            };
            let key = match rule.bans.key_text(ban.key) {
                Some(text) => Some(labels.show(&rule.key, &text)),
                None => ban.shown.clone(),
            };
            bans.push(ban_json(
                &rule.name,
                key,
                now,
                now.saturating_add(ban.left),
                ban.manual,
            ));
            on_board.insert((&*rule.name, ban.key));
        }
    }
    for rule in &policy.rules {
        for ban in rule.bans.active(now) {
            // A shared ban the board read does not list was lifted
            // elsewhere (this copy learns it with its next refresh).
            let lifted = ban.shared && matches!(board, Some(Ok(_)));
            if lifted || on_board.contains(&(&*rule.name, ban.key)) {
                continue;
            }
            let key = ban.key_text.map(|text| labels.show(&rule.key, &text));
            bans.push(ban_json(&rule.name, key, now, ban.until, ban.manual));
        }
    }
    let mut answer = json!({ "bans": bans });
    if let Some(board) = board {
        if let Err(error) = &board {
            tracing::warn!(%error, "the fleet's bans could not be read; listing this instance's");
        }
        answer["shared"] = json!(board.is_ok());
    }
    json_response(StatusCode::OK, &answer)
}

/// One ban as the listing shows it.
fn ban_json(rule: &str, key: Option<String>, now: Nanos, until: Nanos, manual: bool) -> Value {
    json!({
        "rule": rule,
        "key": key,
        "until": until / 1_000_000_000,
        "remaining_secs": until.saturating_sub(now).div_ceil(1_000_000_000),
        "manual": manual,
    })
}

/// `POST /admin/bans` with `{"rule", "key", "for"}`.
///
/// With a shared store the ban is posted to Redis before the answer, so
/// every instance refuses the key (strict: from its next decision; hybrid:
/// within one sync interval); `"shared": false` says Redis could not be
/// told, and the ban holds on this instance only.
pub(super) async fn add(proxy: &Proxy, body: &Value) -> Result<Answer, RefusedCall> {
    let field = |name: &str| body.get(name).and_then(Value::as_str);
    let (Some(rule_name), Some(key), Some(duration)) = (field("rule"), field("key"), field("for"))
    else {
        return Err(bad(
            "expected {\"rule\": NAME, \"key\": KEY, \"for\": DURATION}, for example \
             {\"rule\": \"per-seller\", \"key\": \"seller-42\", \"for\": \"10m\"}",
        ));
    };
    let parsed = crate::config::parse_duration(duration).ok();
    let duration = parsed
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| {
            bad(format!(
                "\"for\": \"{duration}\" is not a duration such as \"90s\", \"10m\" or \"1h\""
            ))
        })?;
    let policy = proxy.policy();
    let rule = policy.rule(rule_name).ok_or_else(|| no_rule(rule_name))?;
    let bucket = policy.keys.key_of_text(&rule.key, key).map_err(bad)?;
    let now = proxy.now();
    let nanos = duration.as_nanos().min(u128::from(u64::MAX)) as u64;
    let text = KeyText::typed(key, rule.key.len());
    let shown = policy.labels.show(&rule.key, &text);
    let redacted = policy.labels.redacted(&rule.key, &text);
    rule.bans.ban(bucket, text, now, nanos);
    let shared = match proxy.store().board() {
        Some(board) => {
            let posted = Posted::ByHand(nanos);
            let told = board
                .post(&rule.name, bucket, posted, Some(&redacted))
                .await;
            match &told {
                Ok(()) => rule.bans.posted(bucket),
                Err(error) => tracing::warn!(rule = %rule.name, key = %shown, %error,
                    "the ban holds on this instance only: Redis could not be told"),
            }
            Some(told.is_ok())
        }
        None => None,
    };
    rule.counters.bans_started.inc();
    tracing::info!(rule = %rule.name, key = %shown, ?duration, "key banned by hand");
    let mut answer = ban_json(
        &rule.name,
        Some(shown),
        now,
        now.saturating_add(nanos),
        true,
    );
    if let Some(shared) = shared {
        answer["shared"] = json!(shared);
    }
    Ok(json_response(StatusCode::CREATED, &answer))
}

/// `DELETE /admin/bans?rule=R&key=K`, K in clear or as the listing shows it.
/// With a shared store the ban is lifted in Redis too, so it ends on every
/// instance.
pub(super) async fn lift(proxy: &Proxy, query: Option<&str>) -> Result<Answer, RefusedCall> {
    let param = |name| crate::key::query_value(query, name).map(crate::key::decode_query);
    let (Some(rule_name), Some(key)) = (param("rule"), param("key")) else {
        return Err(bad(
            "name the ban to lift: DELETE /admin/bans?rule=RULE&key=KEY (percent-encode '|' as %7C)",
        ));
    };
    let policy = proxy.policy();
    let rule = policy.rule(&rule_name).ok_or_else(|| no_rule(&rule_name))?;
    let now = proxy.now();
    let board = proxy.store().board();
    // The bans listed under the key as given, in clear or as its label:
    // this instance's, then the fleet's (whose keys it may never have
    // seen); else the key is hashed below.
    let mut named: Vec<(BucketKey, String)> = rule
        .bans
        .active(now)
        .into_iter()
        .filter_map(|ban| Some((ban.key, ban.key_text?)))
        .filter(|(_, text)| policy.labels.names(&rule.key, text, &key))
        .map(|(bucket, text)| (bucket, policy.labels.show(&rule.key, &text)))
        .collect();
    if let Some(board) = board {
        let listed = board.list().await.map_err(store_failed)?;
        named.extend(
            listed
                .into_iter()
                .filter(|ban| *ban.rule == *rule.name && ban.shown.as_deref() == Some(&key))
                .map(|ban| (ban.key, key.clone())),
        );
    }
    let (buckets, shown): (Vec<BucketKey>, String) = match named.first() {
        Some((_, shown)) => (
            named.iter().map(|(bucket, _)| *bucket).collect(),
            shown.clone(),
        ),
        None => {
            let bucket = policy.keys.key_of_text(&rule.key, &key).map_err(bad)?;
            (vec![bucket], policy.labels.show_typed(&rule.key, &key))
        }
    };
    let mut lifted = false;
    for bucket in buckets {
        if let Some(board) = board {
            lifted |= board.lift(&rule.name, bucket).await.map_err(store_failed)?;
        }
        // With a shared store, the board says whether a ban it listed was
        // in force; this instance's copy, only of a ban never posted.
        lifted |= match rule.bans.lift(bucket, now) {
            Some(shared) => !shared || board.is_none(),
            None => false,
        };
    }
    if lifted {
        tracing::info!(rule = %rule.name, key = %shown, "ban lifted by hand");
        let answer = json!({ "rule": rule_name, "key": shown, "lifted": true });
        Ok(json_response(StatusCode::OK, &answer))
    } else {
        let detail = format!("rule \"{rule_name}\" has no ban in force on \"{shown}\"");
        Err(RefusedCall::new(StatusCode::NOT_FOUND, detail))
    }
}

/// Redis could not be asked: 503, nothing lifted (a ban lifted here alone
/// would hold again with the next copy of the fleet's).
fn store_failed(error: StoreError) -> RefusedCall {
    tracing::warn!(%error, "a ban could not be lifted: Redis did not answer");
    RefusedCall::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "Redis did not answer, so the ban could not be lifted on every instance; nothing was \
         lifted, try again",
    )
}
