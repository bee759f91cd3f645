//! A caller's API key is a credential (docs/operations.md, "Keys in logs and
//! admin views"): outside the request path a `header:` or `query:` key is
//! shown only as its label, the same label in the log, every admin view, the
//! status page and `check`; `ip`, `path` and the other identifiers stay
//! readable; `reveal_keys` shows keys in clear; and with a token set, every
//! admin endpoint but `/metrics`, `/healthz` and `/readyz` needs it, as a
//! Bearer token or as the password of Basic auth.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::{Method, StatusCode};
use support::SluiceProcess;
use support::{binary, get, post_json, send, write_config, Got, RedisServer, Sluice, Upstream};

/// The caller's API key, its query-string key, and a key only the config's
/// `overrides` names. Distinctive, so that any 5 characters of them found
/// anywhere is a leak.
const API_KEY: &str = "sk_live_Q7ZX9KWJ4M";
const QUERY_KEY: &str = "qk_V8PL2XRT6N";
const OVERRIDE_KEY: &str = "sk_live_H3MD8QYB5C";
const TOKEN: &str = "adm1n-t0ken-for-tests";

fn rules() -> String {
    format!(
        r#"
[[rule]]
name = "per-key"
match = {{ path_prefix = "/api" }}
key = ["ip", "header:x-api-key"]
rate = "2/m"
ban = {{ after = 2, within = "1m", for = "10m" }}
overrides = {{ "127.0.0.1|{OVERRIDE_KEY}" = {{ rate = "5/m" }} }}

[[rule]]
name = "per-query-key"
match = {{ path_prefix = "/q" }}
key = ["query:api_key"]
rate = "2/m"

[[rule]]
name = "per-path"
key = ["path"]
rate = "1000/m"
"#
    )
}

fn config(upstream: &Upstream, admin: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{admin}\n{}",
        upstream.addr,
        rules()
    )
}

fn bearer() -> (&'static str, String) {
    ("authorization", format!("Bearer {TOKEN}"))
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// Every 5-character window of `secret` that `text` contains.
fn leaks(secret: &str, text: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    chars
        .windows(5)
        .map(|window| window.iter().collect::<String>())
        .filter(|window| text.contains(window.as_str()))
        .collect()
}

fn assert_secret(surface: &str, text: &str) {
    for secret in [API_KEY, QUERY_KEY, OVERRIDE_KEY] {
        let found = leaks(secret, text);
        assert!(
            found.is_empty(),
            "{surface} shows {found:?} of {secret}:\n{text}"
        );
    }
}

/// A percent-encoded query value (labels carry `|`, `#` and `…`).
fn encoded(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn admin_get(sluice: &SluiceProcess, path: &str) -> Got {
    let (name, value) = bearer();
    let got = get(&sluice.admin_url(path), &[(name, &value)]).await;
    assert_eq!(got.status, StatusCode::OK, "{path}: {}", got.body);
    got
}

async fn admin_post(sluice: &SluiceProcess, path: &str, body: &str) -> Got {
    let (name, value) = bearer();
    post_json(&sluice.admin_url(path), body, &[(name, &value)]).await
}

/// Waits until the process logged a line containing `needle`.
async fn logged(sluice: &SluiceProcess, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = sluice.logged(needle);
        if !lines.is_empty() || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_key_shows_as_one_label_everywhere_and_never_in_clear() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, ""));
    let env = [("SLUICE_ADMIN_TOKEN", TOKEN)];
    let sluice = SluiceProcess::spawn_with_env(&path, &env);

    // The caller is limited, then banned (two strikes); the query caller
    // is limited.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let got = get(&sluice.url("/api/orders"), &[("x-api-key", API_KEY)]).await;
        statuses.push(got.status.as_u16());
        assert_secret("a refusal", &format!("{:?}{}", got.headers, got.body));
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    for _ in 0..4 {
        get(&sluice.url(&format!("/q?api_key={QUERY_KEY}")), &[]).await;
    }

    // The label an operator who holds the key finds for it.
    let clear = encoded(&format!("127.0.0.1|{API_KEY}"));
    let buckets = admin_get(&sluice, &format!("/admin/buckets?rule=per-key&key={clear}")).await;
    let label = buckets.json()["key"].as_str().unwrap().to_owned();
    assert!(label.starts_with("127.0.0.1|sk_l…#"), "{label}");
    assert_eq!(label.len(), "127.0.0.1|sk_l…#".len() + 12, "{label}");
    let query_buckets = admin_get(
        &sluice,
        &format!("/admin/buckets?rule=per-query-key&key={QUERY_KEY}"),
    )
    .await;
    let query_label = query_buckets.json()["key"].as_str().unwrap().to_owned();
    assert!(query_label.starts_with("qk_…#"), "{query_label}");

    let mut surfaces: Vec<(&str, String)> = vec![
        ("buckets", buckets.body.clone()),
        ("query buckets", query_buckets.body.clone()),
    ];
    for view in [
        "/admin/top",
        "/admin/status",
        "/",
        "/admin/rules",
        "/admin/bans",
    ] {
        surfaces.push((view, admin_get(&sluice, view).await.body));
    }
    surfaces.push((
        "/admin/top?by=requests",
        admin_get(&sluice, "/admin/top?by=requests").await.body,
    ));
    let metrics = get(&sluice.admin_url("/metrics"), &[]).await;
    surfaces.push(("/metrics", metrics.body));
    let explain = admin_post(
        &sluice,
        "/admin/explain",
        &format!(
            r#"{{"method":"GET","path":"/api/x?api_key={QUERY_KEY}","headers":{{"x-api-key":"{API_KEY}"}},"ip":"127.0.0.1"}}"#
        ),
    )
    .await;
    assert_eq!(explain.status, StatusCode::OK, "{}", explain.body);
    surfaces.push(("explain", explain.body.clone()));
    let query_explain = admin_post(
        &sluice,
        "/admin/explain",
        &format!(r#"{{"method":"GET","path":"/q?api_key={QUERY_KEY}","ip":"127.0.0.1"}}"#),
    )
    .await;
    surfaces.push(("query explain", query_explain.body.clone()));
    let spend = admin_post(
        &sluice,
        "/admin/spend",
        &format!(r#"{{"rule":"per-query-key","key":"{QUERY_KEY}","amount":1}}"#),
    )
    .await;
    assert_eq!(spend.status, StatusCode::OK, "{}", spend.body);
    surfaces.push(("spend", spend.body.clone()));
    // Error documents of /v1/check: a key of one part, a key whose IP is
    // the credential (swapped), and a batch.
    for body in [
        format!(r#"{{"rule":"per-key","key":"{API_KEY}"}}"#),
        format!(r#"{{"rule":"per-key","key":"{API_KEY}|127.0.0.1"}}"#),
        format!(r#"[{{"rule":"per-key","key":"{API_KEY}"}},{{"rule":"nope","key":"{API_KEY}"}}]"#),
    ] {
        let checked = admin_post(&sluice, "/v1/check", &body).await;
        assert_ne!(checked.status, StatusCode::UNAUTHORIZED);
        surfaces.push(("/v1/check", checked.body));
    }
    let check = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .envs(env)
        .output()
        .unwrap();
    assert!(check.status.success());
    let check_out = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        check_out.contains("overrides \"127.0.0.1|sk_l…#"),
        "{check_out}"
    );
    surfaces.push(("check", check_out.clone()));
    let banned_line = logged(&sluice, "key banned").await;
    let refused_line = logged(&sluice, "request refused").await;
    assert!(!banned_line.is_empty() && !refused_line.is_empty());
    surfaces.push(("log", sluice.log.lock().unwrap().join("\n")));
    for (surface, text) in &surfaces {
        assert_secret(surface, text);
    }

    // One label everywhere: the log, the top keys, the bans, the status
    // page, explain; identifiers (the IP, the path) stay readable.
    let in_log = format!("key={label}");
    assert!(banned_line[0].contains(&in_log), "{banned_line:?}");
    assert!(
        refused_line.iter().any(|line| line.contains(&in_log)),
        "{refused_line:?}"
    );
    let view = |name: &str| {
        surfaces
            .iter()
            .find(|(surface, _)| *surface == name)
            .map(|(_, text)| text.clone())
            .unwrap()
    };
    let top: serde_json::Value = serde_json::from_str(&view("/admin/top")).unwrap();
    let top_keys: Vec<&str> = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|key| key["key"].as_str())
        .collect();
    assert!(top_keys.contains(&label.as_str()), "{top}");
    assert!(top_keys.contains(&query_label.as_str()), "{top}");
    let bans: serde_json::Value = serde_json::from_str(&view("/admin/bans")).unwrap();
    assert_eq!(bans["bans"][0]["key"], label.as_str(), "{bans}");
    assert!(
        view("/").contains(&label),
        "the status page lists the label"
    );
    assert!(view("/admin/status").contains(&label));
    let explained = explain.json();
    assert_eq!(explained["rules"][0]["key"], label.as_str(), "{explained}");
    assert_eq!(explained["rules"][2]["key"], "/api/x", "{explained}");
    let query_explained = query_explain.json();
    assert_eq!(
        query_explained["request"]["query"],
        format!("api_key={query_label}").as_str(),
        "{query_explained}"
    );
    assert_eq!(spend.json()["key"], query_label.as_str());
    let requests: serde_json::Value =
        serde_json::from_str(&view("/admin/top?by=requests")).unwrap();
    assert!(
        requests.to_string().contains("\"/api/orders\""),
        "{requests}"
    );

    // The ban is lifted by its label, as the listing shows it.
    let (name, value) = bearer();
    let lifted = send(
        Method::DELETE,
        &sluice.admin_url(&format!("/admin/bans?rule=per-key&key={}", encoded(&label))),
        &[(name, &value)],
    )
    .await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.body);
    assert_eq!(lifted.json()["key"], label.as_str());
    let after: serde_json::Value =
        serde_json::from_str(&admin_get(&sluice, "/admin/bans").await.body).unwrap();
    assert_eq!(after["bans"], serde_json::json!([]), "{after}");

    // Across a restart of the same deployment (the same token), the same
    // label.
    drop(sluice);
    let again = SluiceProcess::spawn_with_env(&path, &env);
    let relabelled = admin_get(&again, &format!("/admin/buckets?rule=per-key&key={clear}")).await;
    assert_eq!(relabelled.json()["key"], label.as_str());
}

#[tokio::test]
async fn reveal_keys_shows_credential_keys_in_clear() {
    let upstream = Upstream::start().await;
    let toml = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n[admin]\nreveal_keys = true\n{}",
        rules()
    );
    let sluice = Sluice::start(&toml, upstream.addr).await;
    for _ in 0..3 {
        get(&sluice.url("/api/x"), &[("x-api-key", API_KEY)]).await;
    }
    let top = get(&format!("http://{}/admin/top", sluice.admin), &[]).await;
    assert!(
        top.body.contains(&format!("\"127.0.0.1|{API_KEY}\"")),
        "{}",
        top.body
    );
}

#[tokio::test]
async fn instances_sharing_a_redis_label_a_key_alike() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let toml = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n{}",
        redis.url(),
        rules()
    );
    let (a, b) = (
        Sluice::start(&toml, upstream.addr).await,
        Sluice::start(&toml, upstream.addr).await,
    );
    let clear = encoded(&format!("127.0.0.1|{API_KEY}"));
    let label_of = |sluice: &Sluice| {
        format!(
            "http://{}/admin/buckets?rule=per-key&key={clear}",
            sluice.admin
        )
    };
    // Each relabels once it has the seed the instances share.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (x, y) = (
            get(&label_of(&a), &[]).await.json()["key"].clone(),
            get(&label_of(&b), &[]).await.json()["key"].clone(),
        );
        if x == y {
            assert!(x.as_str().unwrap().starts_with("127.0.0.1|sk_l…#"), "{x}");
            break;
        }
        assert!(Instant::now() < deadline, "{x} and {y} never agreed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every admin endpoint, as a call that would succeed with the token.
fn endpoints() -> Vec<(Method, &'static str, &'static str)> {
    vec![
        (Method::GET, "/", ""),
        (Method::GET, "/admin/status", ""),
        (Method::GET, "/admin/rules", ""),
        (Method::GET, "/admin/top", ""),
        (Method::GET, "/admin/bans", ""),
        (Method::GET, "/admin/buckets?rule=per-path&key=/x", ""),
        (
            Method::POST,
            "/admin/explain",
            r#"{"method":"GET","path":"/x","ip":"127.0.0.1"}"#,
        ),
        (
            Method::POST,
            "/admin/bans",
            r#"{"rule":"per-path","key":"/x","for":"1m"}"#,
        ),
        (Method::DELETE, "/admin/bans?rule=per-path&key=/x", ""),
        (
            Method::POST,
            "/admin/spend",
            r#"{"rule":"per-path","key":"/x","amount":1}"#,
        ),
        (
            Method::POST,
            "/v1/check",
            r#"{"rule":"per-path","key":"/x"}"#,
        ),
        (Method::POST, "/admin/reload", ""),
        (Method::GET, "/admin/nothing-here", ""),
    ]
}

async fn call(
    sluice: &SluiceProcess,
    method: &Method,
    path: &str,
    body: &str,
    auth: Option<&str>,
) -> Got {
    let url = sluice.admin_url(path);
    let headers: Vec<(&str, &str)> = auth
        .map(|value| ("authorization", value))
        .into_iter()
        .collect();
    if body.is_empty() {
        send(method.clone(), &url, &headers).await
    } else {
        post_json(&url, body, &headers).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_admin_endpoint_but_metrics_and_probes_needs_it() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, ""));
    let sluice = SluiceProcess::spawn_with_env(&path, &[("SLUICE_ADMIN_TOKEN", TOKEN)]);
    let right_bearer = format!("Bearer {TOKEN}");
    let right_basic = basic("anyone", TOKEN);
    let refused = [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(format!("Bearer {TOKEN}x")),
        Some(basic(TOKEN, "wrong")),
        Some(basic("admin", &TOKEN[1..])),
        Some(format!("Token {TOKEN}")),
    ];
    for (method, path, body) in endpoints() {
        for auth in &refused {
            let got = call(&sluice, &method, path, body, auth.as_deref()).await;
            assert_eq!(
                got.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {auth:?}: {}",
                got.body
            );
            let offered: Vec<&str> = got
                .headers
                .get_all("www-authenticate")
                .iter()
                .map(|value| value.to_str().unwrap())
                .collect();
            assert!(
                offered.iter().any(|o| o.starts_with("Bearer"))
                    && offered.iter().any(|o| o.starts_with("Basic")),
                "{method} {path}: {offered:?}"
            );
            assert_eq!(got.header("content-type"), Some("application/problem+json"));
        }
        for auth in [&right_bearer, &right_basic] {
            let got = call(&sluice, &method, path, body, Some(auth)).await;
            assert_ne!(
                got.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {auth}: {}",
                got.body
            );
            match (&method, path) {
                (_, "/admin/nothing-here") => assert_eq!(got.status, StatusCode::NOT_FOUND),
                // The second lift finds the ban already lifted.
                (&Method::DELETE, _) => assert!(
                    got.status == StatusCode::OK || got.status == StatusCode::NOT_FOUND,
                    "{path}: {}",
                    got.body
                ),
                _ => assert!(
                    got.status.is_success(),
                    "{method} {path} with {auth}: {} {}",
                    got.status,
                    got.body
                ),
            }
        }
    }
    for open in ["/metrics", "/healthz", "/readyz"] {
        let got = get(&sluice.admin_url(open), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{open}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_admin_endpoints_answer_everyone() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &config(&upstream, ""));
    let sluice = SluiceProcess::spawn_with_env(&path, &[("SLUICE_ADMIN_TOKEN", "")]);
    for (method, path, body) in endpoints() {
        let got = call(&sluice, &method, path, body, None).await;
        assert_ne!(
            got.status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {}",
            got.body
        );
    }
}
