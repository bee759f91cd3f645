//! The status page (`GET /`) and its JSON (`GET /admin/status`) over real
//! HTTP: rules with their counts and rates, the most limited key (escaped
//! on the page: a key is whatever a caller sent), the store, the config
//! generation and last reload, uptime and version.

use crate::support;

use http::{Method, StatusCode};
use serde_json::Value;
use support::{assert_problem, get, post_json, send, start, write_config, Sluice, SluiceProcess};

const HOSTILE: &str = "<script>alert(1)</script>";

const RULES: &str = r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-key"
key = ["header:x-key"]
rate = "2/m"

[[rule]]
name = "watching"
key = ["header:x-key"]
rate = "1/m"
shadow = true
"#;

async fn send_as(sluice: &Sluice, key: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        statuses.push(
            get(&sluice.url("/api"), &[("x-key", key)])
                .await
                .status
                .as_u16(),
        );
    }
    statuses
}

fn admin(sluice: &Sluice, path: &str) -> String {
    format!("http://{}{path}", sluice.admin)
}

/// The status once the admin listener answers: its sampler has read the
/// counters by then (it reads before the listener's first accept), so
/// traffic sent afterwards shows in the rates.
async fn first_status(sluice: &Sluice) -> Value {
    let got = get(&admin(sluice, "/admin/status"), &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.header("content-type"), Some("application/json"));
    got.json()
}

#[tokio::test]
async fn the_status_json_has_each_rule_with_counts_and_rates_the_top_key_and_the_store() {
    let (_upstream, sluice) = start(RULES).await;
    let before = first_status(&sluice).await;
    assert_eq!(before["top_limited"], Value::Array(vec![]));
    assert_eq!(before["rules"][0]["totals"]["admitted"], 0);

    assert_eq!(
        send_as(&sluice, "alice", 5).await,
        [200, 200, 429, 429, 429]
    );
    assert_eq!(send_as(&sluice, "bob", 1).await, [200]);

    let status = get(&admin(&sluice, "/admin/status"), &[]).await.json();
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["ready"], true);
    assert!(status["uptime_secs"].as_u64().is_some(), "{status}");
    assert!(status["started"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(
        status["store"],
        serde_json::json!({"backend": "memory", "fallback_active": false})
    );
    assert_eq!(status["config"]["generation"], 1);
    assert_eq!(status["config"]["reloadable"], false);
    assert_eq!(status["config"]["last_reload"], Value::Null);

    let rules = status["rules"].as_array().unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["per-key", "watching"]);
    let per_key = &rules[0];
    assert_eq!(per_key["limits"], "2/m");
    assert_eq!(per_key["shadow"], false);
    assert_eq!(
        per_key["totals"],
        serde_json::json!({"admitted": 3, "limited": 3, "delayed": 0, "shadow_limited": 0, "charged": null})
    );
    assert_eq!(per_key["queue_depth"], 0);
    // Six requests within the first second or so: both rates are positive,
    // and at most the count itself (never divided by less than 1 s).
    for (outcome, most) in [("admitted", 3.0), ("limited", 3.0)] {
        let rate = per_key["rates_per_sec"][outcome].as_f64().unwrap();
        assert!(rate > 0.0 && rate <= most, "{outcome}: {rate} in {status}");
    }
    assert_eq!(per_key["rates_per_sec"]["delayed"], 0.0);
    // The shadow rule admitted what it would have limited (alice's second
    // on, but only those per-key let through were decided by it as well).
    let watching = &rules[1];
    assert_eq!(watching["shadow"], true);
    assert!(
        watching["totals"]["shadow_limited"].as_u64().unwrap() >= 1,
        "{watching}"
    );
    assert!(per_key["history"]["admitted"].is_array(), "{per_key}");

    let top = status["top_limited"].as_array().unwrap();
    assert_eq!(top[0]["rule"], "per-key");
    assert_eq!(top[0]["key"], "alice");
    assert_eq!(top[0]["count"], 3);
    assert_eq!(top[0]["key_hash"].as_str().unwrap().len(), 16);
}

#[tokio::test]
async fn the_page_is_complete_html_with_a_hostile_key_escaped() {
    let (_upstream, sluice) = start(RULES).await;
    first_status(&sluice).await;
    assert_eq!(send_as(&sluice, HOSTILE, 4).await, [200, 200, 429, 429]);
    assert_eq!(send_as(&sluice, "alice", 1).await, [200]);

    let page = get(&admin(&sluice, "/"), &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    let html = &page.body;
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("<tr data-rule=\"per-key\">"), "{html}");
    assert!(html.contains("<tr data-rule=\"watching\">"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(
        !html.contains(HOSTILE),
        "the key's markup reached the page raw"
    );
    // Every number is in the server-rendered page: the limited count of the
    // top key, the rule's limits, version, uptime, store and generation.
    assert!(html.contains("<td class=\"num\">2</td>"), "{html}");
    assert!(html.contains("<div class=\"rmeta\">2/m</div>"), "{html}");
    assert!(
        html.contains(&format!("v{}", env!("CARGO_PKG_VERSION"))),
        "{html}"
    );
    assert!(
        html.contains("<div class=\"value\" id=\"uptime\">"),
        "{html}"
    );
    assert!(html.contains("<div class=\"value\" id=\"store\">memory</div>"));
    assert!(html.contains("<span id=\"generation\">1</span>"));
    assert!(html.contains("data-k=\"limited\">"), "{html}");
    // No external asset: nothing is loaded from anywhere else.
    for external in ["src=\"http", "href=\"http", "@import", "url(", "<link"] {
        assert!(!html.contains(external), "{external} in the page");
    }
}

#[tokio::test]
async fn head_and_other_methods_are_answered_like_the_other_admin_views() {
    let (_upstream, sluice) = start(RULES).await;
    for path in ["/", "/admin/status"] {
        let head = send(Method::HEAD, &admin(&sluice, path), &[]).await;
        assert_eq!(head.status, StatusCode::OK, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path}: {}", head.body);
        let get_type = get(&admin(&sluice, path), &[]).await;
        assert_eq!(head.header("content-type"), get_type.header("content-type"));
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let got = send(method.clone(), &admin(&sluice, path), &[]).await;
            let body = assert_problem(&got, StatusCode::METHOD_NOT_ALLOWED);
            assert!(
                body["detail"].as_str().unwrap().contains("GET"),
                "{method} {path}: {body}"
            );
        }
    }
}

#[tokio::test]
async fn reloads_move_the_generation_and_the_last_one_is_shown_with_its_errors() {
    let upstream = support::Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = |rate: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\n\
             [[rule]]\nname = \"per-key\"\nkey = [\"header:x-key\"]\nrate = \"{rate}\"\n",
            upstream.addr
        )
    };
    let path = write_config(dir.path(), &config("2/m"));
    let sluice = SluiceProcess::spawn(&path);
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    assert_eq!(status["config"]["generation"], 1);
    assert_eq!(status["config"]["reloadable"], true);
    assert_eq!(status["config"]["last_reload"], Value::Null);

    std::fs::write(&path, config("5/m")).unwrap();
    let reloaded = post_json(&sluice.admin_url("/admin/reload"), "", &[]).await;
    assert_eq!(reloaded.status, StatusCode::OK, "{}", reloaded.body);
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    assert_eq!(status["config"]["generation"], 2);
    let last = &status["config"]["last_reload"];
    assert_eq!(last["result"], "ok", "{status}");
    assert_eq!(last["trigger"], "POST /admin/reload");
    assert_eq!(last["error"], Value::Null);
    assert!(last["ago_secs"].as_u64().unwrap() < 10, "{last}");
    assert_eq!(status["rules"][0]["limits"], "5/m");

    // A broken file: the running config (and its generation) stays, and
    // the page says why, escaped.
    std::fs::write(&path, format!("{}\n<oops", config("5/m"))).unwrap();
    let refused = post_json(&sluice.admin_url("/admin/reload"), "", &[]).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let status = get(&sluice.admin_url("/admin/status"), &[]).await.json();
    assert_eq!(status["config"]["generation"], 2);
    let last = &status["config"]["last_reload"];
    assert_eq!(last["result"], "error", "{status}");
    let error = last["error"].as_str().unwrap();
    assert!(error.contains("sluice.toml"), "{error}");
    assert_eq!(status["config"]["reloads"]["ok"], 1);
    assert_eq!(status["config"]["reloads"]["error"], 1);
    let page = get(&sluice.admin_url("/"), &[]).await.body;
    assert!(page.contains("last reload error"), "{page}");
    assert!(page.contains("<pre class=\"error\" id=\"reload-error\">"));
    assert!(!page.contains("\n<oops"), "{page}");
}
