//! A field read for a decision is read once (docs/configuration.md,
//! "Keys"): a request that carries a header or query parameter a rule reads
//! (a `header:`/`query:` key, `match.header`, the token of a `jwt:` key)
//! more than once is answered 400 with the ambiguous-field problem, never
//! forwarded, and takes nothing from any bucket; one line holding a comma
//! is one value, and fields no rule reads pass as sent. The host is matched
//! and keyed in lower case, without port or trailing dot.
//!
//! On the real binary, in front of a real upstream that records what it
//! receives.

use crate::support;

use http::{Method, StatusCode};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use support::{assert_problem, get, metric, post_json, send, write_config, Got};
use support::{SluiceProcess, Upstream};

const AMBIGUOUS: &str = "tag:sluice,2026:problems/ambiguous-field";
const SECRET: &str = "read-once-test-secret-0123456789abcdef";

/// The real binary in front of `upstream`, with `rules`.
fn spawn(upstream: &Upstream, rules: &str) -> (tempfile::TempDir, SluiceProcess) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{rules}",
        upstream.addr
    );
    let path = write_config(dir.path(), &config);
    let sluice = SluiceProcess::spawn_with_env(&path, &[("READ_ONCE_SECRET", SECRET)]);
    (dir, sluice)
}

/// Asserts `got` is the ambiguous-field 400 naming `field` in `place`,
/// without the values sent (`secret`).
fn assert_ambiguous(got: &Got, field: &str, place: &str, secret: &str) {
    let body = assert_problem(got, StatusCode::BAD_REQUEST);
    assert_eq!(body["type"], AMBIGUOUS, "{body}");
    assert_eq!(body["field"], field, "{body}");
    assert_eq!(body["in"], place, "{body}");
    assert!(!got.body.contains(secret), "a value is shown: {}", got.body);
}

fn remaining(got: &Got) -> Option<u64> {
    got.header("x-ratelimit-remaining")
        .map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn a_keyed_header_sent_twice_is_refused_untouched_and_one_line_with_a_comma_is_one_value() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = spawn(
        &upstream,
        r#"
[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "3/m"
"#,
    );
    let url = format!("http://{}/api", sluice.addr);

    let twice = get(&url, &[("x-api-key", "fresh"), ("x-api-key", "spent")]).await;
    assert_ambiguous(&twice, "x-api-key", "header", "fresh");
    assert!(twice.body.contains("per-key"), "{}", twice.body);
    assert_eq!(upstream.count(), 0, "an ambiguous request was forwarded");

    // Nothing was taken from either caller's bucket.
    let fresh = get(&url, &[("x-api-key", "fresh")]).await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_eq!(remaining(&fresh), Some(2));
    let spent = get(&url, &[("x-api-key", "spent")]).await;
    assert_eq!(remaining(&spent), Some(2));

    // One line whose value holds a comma is one value: keyed and forwarded
    // as it came.
    let comma = get(&url, &[("x-api-key", "fresh, spent")]).await;
    assert_eq!(comma.status, StatusCode::OK);
    assert_eq!(remaining(&comma), Some(2), "a bucket of its own");
    let again = get(&url, &[("x-api-key", "fresh, spent")]).await;
    assert_eq!(remaining(&again), Some(1));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[2].headers["x-api-key"], "fresh, spent");

    // Two lines of a field no rule reads are forwarded as sent.
    let other = get(
        &url,
        &[("x-api-key", "other"), ("x-trace", "1"), ("x-trace", "2")],
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);
    let last = upstream.seen().pop().unwrap();
    let lines: Vec<_> = last.headers.get_all("x-trace").iter().collect();
    assert_eq!(lines, ["1", "2"]);

    // Counted as a missing key, logged naming the field, never a value.
    let metrics = send(
        Method::GET,
        &format!("http://{}/metrics", sluice.admin),
        &[],
    )
    .await;
    let series = "sluice_requests_total{rule=\"per-key\",outcome=\"missing_key\"}";
    assert_eq!(metric(&metrics.body, series), Some(1.0));
    let log = sluice.log.lock().unwrap().join("\n");
    let line = log
        .lines()
        .find(|line| line.contains("ambiguous_field"))
        .unwrap_or_else(|| panic!("no refusal line in:\n{log}"));
    assert!(line.contains("header:x-api-key"), "{line}");
    assert!(!line.contains("fresh"), "{line}");

    // Explain walks the same rules: two lines given as a list.
    let explained = post_json(
        &format!("http://{}/admin/explain", sluice.admin),
        &json!({"method": "GET", "path": "/api", "ip": "127.0.0.1",
                "headers": {"x-api-key": ["fresh", "spent"]}})
        .to_string(),
        &[],
    )
    .await
    .json();
    let decision = &explained["decision"];
    assert_eq!(decision["outcome"], "ambiguous_field", "{explained}");
    assert_eq!(decision["status"], 400);
    assert_eq!(decision["field"], "x-api-key");
    assert_eq!(explained["rules"][0]["ambiguous_field"]["in"], "header");
    assert!(!explained.to_string().contains("fresh"), "{explained}");
}

#[tokio::test]
async fn a_keyed_query_parameter_sent_twice_is_refused_and_takes_nothing() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = spawn(
        &upstream,
        r#"
[[rule]]
name = "per-query-key"
key = ["query:key"]
rate = "3/m"
"#,
    );
    let base = format!("http://{}/api", sluice.addr);
    for query in [
        "key=fresh&key=spent",
        "key=fresh&k%65y=spent",
        "key=fresh&key",
    ] {
        let twice = get(&format!("{base}?{query}"), &[]).await;
        assert_ambiguous(&twice, "key", "query", "fresh");
    }
    assert_eq!(upstream.count(), 0, "an ambiguous request was forwarded");
    let fresh = get(&format!("{base}?key=fresh"), &[]).await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_eq!(remaining(&fresh), Some(2));
    // A comma inside one value is one value.
    let comma = get(&format!("{base}?key=fresh,spent&other=1&other=2"), &[]).await;
    assert_eq!(comma.status, StatusCode::OK);
    assert_eq!(remaining(&comma), Some(2));
    assert_eq!(
        upstream.seen()[1].target,
        "/api?key=fresh,spent&other=1&other=2"
    );
}

#[tokio::test]
async fn a_match_header_sent_twice_is_refused_when_the_rule_fits() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = spawn(
        &upstream,
        r#"
[[rule]]
name = "free-plan"
match = { header = { "x-plan" = "free" } }
rate = "3/m"
"#,
    );
    let url = format!("http://{}/api", sluice.addr);
    let twice = get(&url, &[("x-plan", "free"), ("x-plan", "paid")]).await;
    assert_ambiguous(&twice, "x-plan", "header", "paid");
    assert_eq!(upstream.count(), 0);
    // Neither line fits: the rule applies under no reading of the field.
    let neither = get(&url, &[("x-plan", "paid"), ("x-plan", "gold")]).await;
    assert_eq!(neither.status, StatusCode::OK);
    assert_eq!(remaining(&neither), None);
    let free = get(&url, &[("x-plan", "free")]).await;
    assert_eq!(remaining(&free), Some(2), "the caller's bucket was touched");
}

#[tokio::test]
async fn two_tokens_for_a_jwt_rule_are_refused_even_when_missing_keys_are_skipped() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = spawn(
        &upstream,
        r#"
[identity.jwt]
secret_env = "READ_ONCE_SECRET"

[[rule]]
name = "per-seller"
key = ["jwt:sub"]
rate = "3/m"
missing = "skip"
"#,
    );
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let token = |sub: &str| {
        let claims = json!({"sub": sub, "exp": support::unix_now() + 3600});
        format!(
            "Bearer {}",
            encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
        )
    };
    let url = format!("http://{}/api", sluice.addr);
    let (fresh, spent) = (token("fresh"), token("spent"));
    let twice = get(
        &url,
        &[("authorization", &fresh), ("authorization", &spent)],
    )
    .await;
    assert_ambiguous(&twice, "authorization", "header", &fresh[7..]);
    assert_eq!(upstream.count(), 0, "two tokens went through unlimited");
    let once = get(&url, &[("authorization", &fresh)]).await;
    assert_eq!(once.status, StatusCode::OK);
    assert_eq!(remaining(&once), Some(2));
}

#[tokio::test]
async fn a_host_is_matched_and_keyed_without_case_port_or_trailing_dot() {
    let upstream = Upstream::start().await;
    let (_dir, sluice) = spawn(
        &upstream,
        r#"
[[rule]]
name = "per-host"
match = { host = "api.example.com" }
key = ["host"]
rate = "3/m"
"#,
    );
    let url = format!("http://{}/api", sluice.addr);
    let dotted = get(&url, &[("host", "API.Example.com.:8080")]).await;
    assert_eq!(dotted.status, StatusCode::OK);
    assert_eq!(remaining(&dotted), Some(2));
    let plain = get(&url, &[("host", "api.example.com")]).await;
    assert_eq!(remaining(&plain), Some(1), "one host, one bucket");
    let other = get(&url, &[("host", "other.example.com")]).await;
    assert_eq!(remaining(&other), None, "match.host fits another host");
    // The upstream gets the Host as the client sent it.
    assert_eq!(upstream.seen()[0].headers["host"], "API.Example.com.:8080");
}
