//! Limits as a client sees them: how many requests a rule admits, the headers
//! and problem document of a 429, refill, several rules, missing keys, closed
//! routes, shadow rules, key sources and path normalisation.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use http::StatusCode;
use support::{assert_problem, get, start, unix_now, Got, Sluice, Upstream};

/// A config whose upstream is the test's; `rest` holds `[response]`,
/// `[[rule]]` and so on.
/// The status codes of `n` sequential requests.
async fn statuses(sluice: &Sluice, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    let mut codes = Vec::with_capacity(n);
    for _ in 0..n {
        codes.push(get(&sluice.url(path), headers).await.status.as_u16());
    }
    codes
}

fn repeated(code: u16, n: usize) -> Vec<u16> {
    vec![code; n]
}

fn concat(parts: &[Vec<u16>]) -> Vec<u16> {
    parts.concat()
}

fn header_u64(got: &Got, name: &str) -> u64 {
    got.header(name)
        .unwrap_or_else(|| panic!("{name} missing: {:?}", got.headers))
        .parse()
        .unwrap_or_else(|e| panic!("{name} is not an integer ({e})"))
}

/// Every rate-limit header sluice may add.
const RATE_LIMIT_HEADERS: [&str; 5] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
];

fn assert_no_rate_limit_headers(got: &Got) {
    for name in RATE_LIMIT_HEADERS {
        assert!(got.header(name).is_none(), "unexpected {name} on {got:?}");
    }
}

/// `"name";r=R;t=T` → (R, T) for the item named `name`.
fn ratelimit_item(got: &Got, name: &str) -> (u64, u64) {
    let header = got.header("ratelimit").expect("RateLimit header");
    let prefix = format!("\"{name}\";r=");
    let item = header
        .split(", ")
        .find_map(|item| item.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no item for {name} in RateLimit: {header}"));
    let (r, t) = item.split_once(";t=").expect("r and t");
    (r.parse().unwrap(), t.parse().unwrap())
}

const FIVE_PER_TEN_SECONDS: &str = r#"
[[rule]]
name = "per-ip"
rate = "5/10s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_the_sixth_request_of_a_five_per_ten_seconds_burst() {
    let (upstream, sluice) = start(FIVE_PER_TEN_SECONDS).await;

    let codes = statuses(&sluice, "/", &[], 8).await;

    assert_eq!(codes, concat(&[repeated(200, 5), repeated(429, 3)]));
    assert_eq!(
        upstream.count(),
        5,
        "rejected requests never reach the upstream"
    );
    let allowed = r#"sluice_requests_total{rule="per-ip",outcome="allowed"}"#;
    let limited = r#"sluice_requests_total{rule="per-ip",outcome="limited"}"#;
    assert_eq!(sluice.metric(allowed).await, 5.0);
    assert_eq!(sluice.metric(limited).await, 3.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_three_at_one_per_second_admits_three_at_once() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "1/s"
burst = 3
"#,
    )
    .await;

    let codes = statuses(&sluice, "/", &[], 4).await;

    assert_eq!(codes, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_request_gets_every_header_and_the_problem_document_of_the_spec() {
    let (_upstream, sluice) = start(FIVE_PER_TEN_SECONDS).await;
    statuses(&sluice, "/", &[], 5).await;

    let got = get(&sluice.url("/"), &[]).await;
    let now = unix_now();

    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    // 5 per 10 s refills one request every 2 s.
    let retry_after = header_u64(&got, "retry-after");
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(got.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(got.header("x-ratelimit-remaining"), Some("0"));
    let reset = header_u64(&got, "x-ratelimit-reset");
    assert!(
        reset > now && reset <= now + 10 + 1,
        "X-RateLimit-Reset {reset} is Unix seconds within the period (now {now})"
    );
    assert_eq!(got.header("ratelimit-policy"), Some(r#""per-ip";q=5;w=10"#));
    let (remaining, reset_in) = ratelimit_item(&got, "per-ip");
    assert_eq!(remaining, 0);
    assert!((1..=10).contains(&reset_in), "RateLimit t={reset_in}");

    let body = got.json();
    let members: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        members,
        BTreeSet::from([
            "type",
            "title",
            "status",
            "detail",
            "violated-policies",
            "rule",
            "limit",
            "remaining",
            "retry_after_secs",
            "request_id",
        ])
    );
    // The id of this answer, as its X-Request-Id says.
    assert_eq!(
        Some(body["request_id"].as_str().unwrap()),
        got.header("x-request-id")
    );
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["detail"], "rule 'per-ip' allows 5 requests per 10s");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    assert_eq!(body["rule"], "per-ip");
    assert_eq!(body["limit"], 5);
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["retry_after_secs"], retry_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_responses_carry_the_remaining_budget() {
    let (_upstream, sluice) = start(FIVE_PER_TEN_SECONDS).await;

    let first = get(&sluice.url("/"), &[]).await;
    let second = get(&sluice.url("/"), &[]).await;
    let now = unix_now();

    assert_eq!(
        (first.status, second.status),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(first.body, "ok", "the upstream's body");
    assert_eq!(first.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("4"));
    assert_eq!(second.header("x-ratelimit-remaining"), Some("3"));
    let reset = header_u64(&second, "x-ratelimit-reset");
    assert!(
        reset > now && reset <= now + 10 + 1,
        "reset {reset}, now {now}"
    );
    assert_eq!(
        second.header("ratelimit-policy"),
        Some(r#""per-ip";q=5;w=10"#)
    );
    let (remaining, reset_in) = ratelimit_item(&second, "per-ip");
    assert_eq!(remaining, 3);
    assert!((1..=10).contains(&reset_in), "RateLimit t={reset_in}");
    assert!(second.header("retry-after").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_success_false_keeps_rate_limit_headers_off_admitted_responses_only() {
    let (_upstream, sluice) = start(
        r#"
[response]
on_success = false

[[rule]]
name = "per-ip"
rate = "1/m"
"#,
    )
    .await;

    let admitted = get(&sluice.url("/"), &[]).await;
    let limited = get(&sluice.url("/"), &[]).await;

    assert_eq!(admitted.status, StatusCode::OK);
    assert_no_rate_limit_headers(&admitted);
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    for name in RATE_LIMIT_HEADERS {
        assert!(limited.header(name).is_some(), "{name} missing on the 429");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_header_style_sends_only_x_ratelimit_headers() {
    let (_upstream, sluice) = start(
        r#"
[response]
headers = "legacy"

[[rule]]
name = "per-ip"
rate = "1/m"
"#,
    )
    .await;

    for got in [
        get(&sluice.url("/"), &[]).await,
        get(&sluice.url("/"), &[]).await,
    ] {
        assert_eq!(got.header("x-ratelimit-limit"), Some("1"), "{got:?}");
        assert_eq!(got.header("x-ratelimit-remaining"), Some("0"));
        assert!(got.header("x-ratelimit-reset").is_some());
        assert!(got.header("ratelimit-policy").is_none(), "{got:?}");
        assert!(got.header("ratelimit").is_none(), "{got:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ietf_header_style_sends_only_ratelimit_and_ratelimit_policy() {
    let (_upstream, sluice) = start(
        r#"
[response]
headers = "ietf"

[[rule]]
name = "per-ip"
rate = "1/m"
"#,
    )
    .await;

    for got in [
        get(&sluice.url("/"), &[]).await,
        get(&sluice.url("/"), &[]).await,
    ] {
        assert_eq!(
            got.header("ratelimit-policy"),
            Some(r#""per-ip";q=1;w=60"#),
            "{got:?}"
        );
        assert_eq!(ratelimit_item(&got, "per-ip").0, 0);
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert!(got.header(name).is_none(), "unexpected {name} on {got:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_drained_bucket_admits_exactly_one_more_after_one_refill_interval() {
    // 2 per second: one request's worth every 500 ms; on paused time.
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "per-ip"
rate = "2/1s"
"#,
    )
    .await;
    assert_eq!(statuses(&sluice, "/", &[], 3).await, [200, 200, 429]);

    tokio::time::advance(Duration::from_millis(499)).await;
    assert_eq!(statuses(&sluice, "/", &[], 1).await, [429]);
    tokio::time::advance(Duration::from_millis(1)).await;

    assert_eq!(statuses(&sluice, "/", &[], 2).await, [200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rejected_by_the_second_rule_costs_the_first_rule_nothing() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "wide"
rate = "5/m"

[[rule]]
name = "narrow"
match = { path_prefix = "/narrow" }
rate = "2/m"
"#,
    )
    .await;

    // Both rules apply to /narrow: the narrow one runs out first.
    let narrow = statuses(&sluice, "/narrow", &[], 2).await;
    let rejected = get(&sluice.url("/narrow"), &[]).await;
    statuses(&sluice, "/narrow", &[], 2).await;

    assert_eq!(narrow, [200, 200]);
    assert_eq!(rejected.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        rejected.header("ratelimit-policy"),
        Some(r#""wide";q=5;w=60, "narrow";q=2;w=60"#),
        "every applicable rule is listed"
    );
    assert_eq!(
        rejected.header("x-ratelimit-limit"),
        Some("2"),
        "the tightest rule"
    );
    assert_eq!(rejected.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(ratelimit_item(&rejected, "wide").0, 3);
    let body = rejected.json();
    assert_eq!(body["rule"], "narrow");
    assert_eq!(body["violated-policies"], serde_json::json!(["narrow"]));

    // Three rejections later the wide rule still has the 3 the two
    // admitted requests left it, and then it is enforced too.
    let elsewhere = get(&sluice.url("/elsewhere"), &[]).await;
    assert_eq!(elsewhere.status, StatusCode::OK);
    assert_eq!(elsewhere.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(
        statuses(&sluice, "/elsewhere", &[], 3).await,
        [200, 200, 429]
    );
    assert_eq!(upstream.count(), 5);
    let wide_limited = r#"sluice_requests_total{rule="wide",outcome="limited"}"#;
    let narrow_limited = r#"sluice_requests_total{rule="narrow",outcome="limited"}"#;
    assert_eq!(sluice.metric(wide_limited).await, 1.0);
    assert_eq!(sluice.metric(narrow_limited).await, 3.0);
}

const PER_API_KEY: &str = r#"
[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "2/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_key_share_one_bucket_by_default() {
    let (_upstream, sluice) = start(&format!("{PER_API_KEY}missing = \"shared\"\n")).await;

    let keyless = statuses(&sluice, "/", &[], 3).await;
    let keyed = statuses(&sluice, "/", &[("x-api-key", "alice")], 1).await;

    assert_eq!(keyless, [200, 200, 429]);
    assert_eq!(keyed, [200], "a keyed caller has its own bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_skip_leaves_requests_without_the_key_unlimited() {
    let (_upstream, sluice) = start(&format!("{PER_API_KEY}missing = \"skip\"\n")).await;

    let mut keyless = Vec::new();
    for _ in 0..4 {
        keyless.push(get(&sluice.url("/"), &[]).await);
    }
    let keyed = statuses(&sluice, "/", &[("x-api-key", "alice")], 3).await;

    for got in &keyless {
        assert_eq!(got.status, StatusCode::OK);
        assert_no_rate_limit_headers(got);
    }
    assert_eq!(keyed, [200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_reject_answers_400_with_a_problem_document() {
    let (upstream, sluice) = start(&format!("{PER_API_KEY}missing = \"reject\"\n")).await;

    let keyless = get(&sluice.url("/"), &[]).await;
    let keyed = get(&sluice.url("/"), &[("x-api-key", "alice")]).await;

    let body = assert_problem(&keyless, StatusCode::BAD_REQUEST);
    assert!(
        body["detail"].as_str().unwrap().contains("x-api-key"),
        "the detail names what is missing: {body}"
    );
    assert_eq!(keyed.status, StatusCode::OK);
    assert_eq!(upstream.count(), 1, "the rejected request is not forwarded");
    let missing = r#"sluice_requests_total{rule="per-key",outcome="missing_key"}"#;
    assert_eq!(sluice.metric(missing).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_route_is_limited_with_no_promise_of_a_retry() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "closed"
rate = "0/m"
"#,
    )
    .await;

    let got = get(&sluice.url("/"), &[]).await;

    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    assert!(got.header("retry-after").is_none(), "{got:?}");
    let body = got.json();
    assert!(
        body.as_object().unwrap().contains_key("retry_after_secs")
            && body["retry_after_secs"].is_null(),
        "retry_after_secs is present and null: {body}"
    );
    assert_eq!(body["rule"], "closed");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_rule_forwards_everything_and_counts_what_it_would_have_limited() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "dry-run"
rate = "2/m"
shadow = true
"#,
    )
    .await;

    let codes = statuses(&sluice, "/", &[], 5).await;
    let last = get(&sluice.url("/"), &[]).await;

    assert_eq!(codes, repeated(200, 5));
    assert_eq!(last.status, StatusCode::OK);
    assert_no_rate_limit_headers(&last);
    assert_eq!(upstream.count(), 6);
    let shadow_limited = r#"sluice_requests_total{rule="dry-run",outcome="shadow_limited"}"#;
    let limited = r#"sluice_requests_total{rule="dry-run",outcome="limited"}"#;
    assert_eq!(sluice.metric(shadow_limited).await, 4.0);
    assert_eq!(sluice.metric(limited).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_rule_marks_the_responses_it_would_have_limited() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "dry-run"
rate = "1/m"
shadow = true
"#,
    )
    .await;

    let within = get(&sluice.url("/"), &[]).await;
    let beyond = get(&sluice.url("/"), &[]).await;

    assert_eq!(
        (within.status, beyond.status),
        (StatusCode::OK, StatusCode::OK)
    );
    assert!(
        within.header("x-sluice-would-limit").is_none(),
        "{within:?}"
    );
    assert_eq!(
        beyond.header("x-sluice-would-limit"),
        Some("dry-run"),
        "{beyond:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_key_header_value_gets_its_own_bucket() {
    let (_upstream, sluice) = start(PER_API_KEY).await;

    let alice = statuses(&sluice, "/", &[("x-api-key", "alice")], 3).await;
    let bob = statuses(&sluice, "/", &[("x-api-key", "bob")], 3).await;

    assert_eq!(alice, [200, 200, 429]);
    assert_eq!(bob, [200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_query_key_value_gets_its_own_bucket_however_it_is_encoded() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-query-key"
key = ["query:key"]
rate = "2/m"
"#,
    )
    .await;

    let alice = statuses(&sluice, "/?key=alice", &[], 2).await;
    let alice_encoded = statuses(&sluice, "/?key=%61lice&page=2", &[], 1).await;
    let bob = statuses(&sluice, "/?page=1&key=bob", &[], 3).await;

    assert_eq!(alice, [200, 200]);
    assert_eq!(alice_encoded, [429], "%61lice is alice");
    assert_eq!(bob, [200, 200, 429]);
    let targets: Vec<String> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(
        targets[2], "/?page=1&key=bob",
        "the query is forwarded unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spellings_of_one_path_share_its_bucket_and_the_upstream_gets_the_normal_form() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-path"
key = ["path"]
rate = "4/m"
"#,
    )
    .await;

    let variants = ["/a/../b", "//b", "/%62", "/b?x=%62"];
    let mut codes = Vec::new();
    for path in variants {
        codes.push(get(&sluice.url(path), &[]).await.status.as_u16());
    }
    let fifth = get(&sluice.url("/b"), &[]).await;
    let other = get(&sluice.url("/c"), &[]).await;

    assert_eq!(codes, [200, 200, 200, 200]);
    assert_eq!(
        fifth.status,
        StatusCode::TOO_MANY_REQUESTS,
        "all four spent /b's bucket"
    );
    assert_eq!(other.status, StatusCode::OK);
    let targets: Vec<String> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(targets, ["/b", "/b", "/b", "/b?x=%62", "/c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_normalize_path_off_the_upstream_gets_the_path_as_sent_but_the_bucket_is_shared() {
    let upstream = Upstream::start().await;
    let toml = r#"
[server]
upstream = "http://{upstream}"
normalize_path = false

[[rule]]
name = "per-path"
key = ["path"]
rate = "1/m"
"#;
    let sluice = Sluice::start(toml, upstream.addr).await;

    let first = get(&sluice.url("/a/../b"), &[]).await;
    let second = get(&sluice.url("/b"), &[]).await;

    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        second.status,
        StatusCode::TOO_MANY_REQUESTS,
        "one bucket for both spellings"
    );
    assert_eq!(upstream.seen()[0].target, "/a/../b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_cannot_be_normalised_is_answered_400() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "100/m"
"#,
    )
    .await;

    for path in ["/%zz", "/../x", "/a/%4"] {
        let got = get(&sluice.url(path), &[]).await;
        assert_problem(&got, StatusCode::BAD_REQUEST);
    }
    assert_eq!(upstream.count(), 0);
}

/// `match.header` and `match.client`: a rule applies only to the requests
/// they name, and `/admin/explain` says which of them did not fit.
const BY_PLAN_AND_NETWORK: &str = r#"trusted_proxies = ["127.0.0.1/32"]
[[rule]]
name = "free-plan"
match = { header = { "x-plan" = ["free", "trial"] } }
key = "header:x-user"
rate = "2/m"

[[rule]]
name = "office"
match = { client = ["10.0.0.0/8"] }
rate = "1/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_matched_by_header_limits_only_requests_with_a_value_it_names() {
    let (upstream, sluice) = start(BY_PLAN_AND_NETWORK).await;
    let from = ("x-forwarded-for", "192.0.2.1");

    // Each user on the free or trial plan has two requests a minute.
    let free = statuses(
        &sluice,
        "/",
        &[from, ("x-plan", "free"), ("x-user", "u1")],
        3,
    )
    .await;
    assert_eq!(free, [200, 200, 429]);
    let trial = statuses(
        &sluice,
        "/",
        &[from, ("x-plan", "trial"), ("x-user", "u1")],
        1,
    )
    .await;
    assert_eq!(trial, [429], "one user's bucket, whichever listed value");
    let other_user = statuses(
        &sluice,
        "/",
        &[from, ("x-plan", "free"), ("x-user", "u2")],
        1,
    )
    .await;
    assert_eq!(other_user, [200]);
    // Another value (values are compared exactly), or no header: not limited.
    for plan in [Some("paid"), Some("FREE"), None] {
        let mut headers = vec![from, ("x-user", "u1")];
        headers.extend(plan.map(|plan| ("x-plan", plan)));
        let codes = statuses(&sluice, "/", &headers, 4).await;
        assert_eq!(codes, repeated(200, 4), "x-plan {plan:?}");
    }
    assert_eq!(upstream.count(), 2 + 1 + 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_matched_by_client_network_limits_only_clients_inside_it() {
    let (_upstream, sluice) = start(BY_PLAN_AND_NETWORK).await;

    // The client as keyed: the address the trusted proxy forwarded.
    let inside = statuses(&sluice, "/", &[("x-forwarded-for", "10.1.2.3")], 2).await;
    assert_eq!(inside, [200, 429]);
    let outside = statuses(&sluice, "/", &[("x-forwarded-for", "192.0.2.1")], 3).await;
    assert_eq!(outside, repeated(200, 3));

    // Explain names the field that did not fit, without the header's value.
    let got = support::post_json(
        &format!("http://{}/admin/explain", sluice.admin),
        r#"{"method": "GET", "path": "/", "headers": {"x-plan": "sk_live_1234"}, "ip": "192.0.2.9"}"#,
        &[],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let answer = got.json();
    let rule = |name: &str| {
        answer["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["rule"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(rule("free-plan")["failed"], "header", "{answer}");
    assert_eq!(
        rule("free-plan")["reason"],
        "header x-plan has a value other than \"free\", \"trial\""
    );
    assert!(!got.body.contains("sk_live"), "{}", got.body);
    assert_eq!(rule("office")["failed"], "client", "{answer}");
    assert_eq!(
        rule("office")["reason"],
        "client 192.0.2.9 is in none of \"10.0.0.0/8\""
    );
}
