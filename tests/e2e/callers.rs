//! What each caller may do, over real HTTP: tiers and overrides pick a
//! caller's limits, a key limited too often earns a ban that expires, and a
//! retiring API version's limit falls on schedule, with Deprecation, Sunset
//! and Link headers, until it answers 410.

use crate::support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use sluice::config::format_timestamp;
use support::{assert_problem, get, start, Sluice};

async fn statuses(sluice: &Sluice, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut got = Vec::with_capacity(n);
    for _ in 0..n {
        got.push(get(&sluice.url("/api"), headers).await.status.as_u16());
    }
    got
}

fn admitted(statuses: &[u16]) -> usize {
    statuses.iter().filter(|&&s| s == 200).count()
}

#[tokio::test]
async fn tiers_and_overrides_pick_each_callers_limits() {
    let (_upstream, sluice) = start(
        r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "sellers"
key = ["header:x-seller"]
rate = "2/m"
tiers = { by = "header:x-plan", premium = { rate = "5/m" }, tiny = { rate = "1/m" } }
overrides = { "seller-42" = { rate = "8/m" } }
"#,
    )
    .await;
    // No plan, or a plan that names no tier: the rule's own 2/m.
    assert_eq!(
        admitted(&statuses(&sluice, &[("x-seller", "a")], 4).await),
        2
    );
    let unknown = [("x-seller", "b"), ("x-plan", "gold")];
    assert_eq!(admitted(&statuses(&sluice, &unknown, 4).await), 2);
    // Tiers.
    let premium = [("x-seller", "c"), ("x-plan", "premium")];
    let got = get(&sluice.url("/api"), &premium).await;
    assert_eq!(got.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(admitted(&statuses(&sluice, &premium, 6).await), 4);
    let tiny = [("x-seller", "d"), ("x-plan", "tiny")];
    assert_eq!(admitted(&statuses(&sluice, &tiny, 3).await), 1);
    // The override wins over the tier the seller claims.
    let big = [("x-seller", "seller-42"), ("x-plan", "tiny")];
    assert_eq!(admitted(&statuses(&sluice, &big, 10).await), 8);
    // A premium seller's tier bucket is its own: a tiny seller is unaffected.
    let other_tiny = [("x-seller", "e"), ("x-plan", "tiny")];
    assert_eq!(admitted(&statuses(&sluice, &other_tiny, 2).await), 1);

    let rules = get(&format!("http://{}/admin/rules", sluice.admin), &[])
        .await
        .json();
    let rule = &rules["rules"][0];
    assert_eq!(rule["tiers"]["by"], "header:x-plan");
    assert_eq!(rule["tiers"]["tiers"][0]["tier"], "premium");
    assert_eq!(rule["tiers"]["tiers"][0]["limits"][0]["count"], 5);
    assert_eq!(rule["overrides"][0]["key"], "seller-42");
    assert_eq!(rule["overrides"][0]["limits"][0]["count"], 8);
}

// Paused time: the ban's 2 s pass by `advance`, exactly, on any machine.
#[tokio::test(start_paused = true)]
async fn a_key_limited_too_often_is_banned_and_the_ban_expires() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-seller"
key = ["header:x-seller"]
rate = "2/m"
ban = { after = 3, within = "1m", for = "2s" }
"#,
    )
    .await;
    let abuser = [("x-seller", "abuser")];
    // 2 admitted, then 3 limited answers earn the ban.
    assert_eq!(
        statuses(&sluice, &abuser, 5).await,
        [200, 200, 429, 429, 429]
    );
    let banned = get(&sluice.url("/api"), &abuser).await;
    let body = assert_problem(&banned, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["banned"], true);
    assert_eq!(body["limit"], 2, "{body}");
    assert_eq!(body["remaining"], 0, "{body}");
    assert_eq!(banned.header("retry-after"), Some("2"));
    assert_eq!(
        sluice
            .metric(r#"sluice_bans_total{rule="per-seller"}"#)
            .await,
        1.0
    );
    let listed = get(&format!("http://{}/admin/bans", sluice.admin), &[])
        .await
        .json();
    assert_eq!(listed["bans"][0]["key"], "abuser");
    assert_eq!(listed["bans"][0]["manual"], false);
    // Others are not affected; the upstream saw only the 2 admitted + 1.
    assert_eq!(statuses(&sluice, &[("x-seller", "good")], 1).await, [200]);
    assert_eq!(upstream.seen().len(), 3);

    // Requests while banned do not earn another ban: after it expires the
    // caller is simply rate limited again (its bucket is still spent).
    for _ in 0..10 {
        get(&sluice.url("/api"), &abuser).await;
    }
    tokio::time::advance(Duration::from_nanos(2_000_000_000 - 1)).await;
    let still = get(&sluice.url("/api"), &abuser).await;
    let body = assert_problem(&still, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["banned"], true, "the ban ended early: {body}");
    tokio::time::advance(Duration::from_nanos(1)).await;
    let after = get(&sluice.url("/api"), &abuser).await;
    let body = assert_problem(&after, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["rule"], "per-seller");
    assert!(body.get("banned").is_none(), "{body}");
    assert_eq!(
        sluice
            .metric(r#"sluice_bans_total{rule="per-seller"}"#)
            .await,
        1.0
    );
}

fn unix_nanos(offset_secs: i64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    ((now + offset_secs) as u64) * 1_000_000_000
}

#[tokio::test]
async fn a_retiring_version_answers_its_current_limit_with_sunset_headers() {
    // Two hours into a four-hour sunset with hourly steps, 100/d → 0/d:
    // n = 4, k = 3, COUNT = 100 − 75 = 25.
    let start_at = unix_nanos(-2 * 3600 - 60);
    let end_at = start_at + 4 * 3600 * 1_000_000_000;
    let config = format!(
        r#"
[[rule]]
name = "v0"
rate = "100/d"
sunset = {{ start = "{}", end = "{}", to = "0/d", step = "1h", link = "https://example.com/v1" }}
"#,
        format_timestamp(start_at),
        format_timestamp(end_at)
    );
    let (_upstream, sluice) = start(&config).await;
    let got = get(&sluice.url("/api"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-ratelimit-limit"), Some("25"));
    assert_eq!(
        got.header("deprecation"),
        Some(format!("@{}", start_at / 1_000_000_000).as_str())
    );
    let sunset = got.header("sunset").expect("a Sunset header");
    let parsed = httpdate::parse_http_date(sunset).unwrap();
    assert_eq!(
        parsed.duration_since(UNIX_EPOCH).unwrap().as_secs(),
        end_at / 1_000_000_000
    );
    // The preferred format of RFC 9110 §5.6.7 (IMF-fixdate), not one of the
    // obsolete ones a parser also accepts.
    assert_eq!(httpdate::fmt_http_date(parsed), sunset);
    assert_eq!(
        got.header("link"),
        Some(r#"<https://example.com/v1>; rel="sunset""#)
    );
    let rules = get(&format!("http://{}/admin/rules", sluice.admin), &[])
        .await
        .json();
    assert_eq!(rules["rules"][0]["limits"][0]["count"], 25);
    assert_eq!(rules["rules"][0]["sunset"]["count_now"], 25);
    // 24 more pass, then 429 — still with the sunset headers.
    let rest = statuses(&sluice, &[], 25).await;
    assert_eq!(admitted(&rest), 24);
    let limited = get(&sluice.url("/api"), &[]).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.header("sunset").is_some());
}

#[tokio::test]
async fn a_retired_version_answers_410_and_says_where_to_go() {
    let start_at = unix_nanos(-3 * 86_400);
    let end_at = unix_nanos(-86_400);
    let config = format!(
        r#"
[[rule]]
name = "v0"
rate = "100/d"
sunset = {{ start = "{}", end = "{}", to = "0/d", link = "https://example.com/v1" }}
"#,
        format_timestamp(start_at),
        format_timestamp(end_at)
    );
    let (upstream, sluice) = start(&config).await;
    let got = get(&sluice.url("/api"), &[]).await;
    let body = assert_problem(&got, StatusCode::GONE);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("https://example.com/v1"),
        "{body}"
    );
    assert_eq!(body["link"], "https://example.com/v1");
    assert!(got.header("sunset").is_some());
    assert_eq!(upstream.seen().len(), 0);
}
